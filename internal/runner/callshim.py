def _sandbox_call(spec_path, result_path, max_result):
    # The service's side of a tool call, run by exec's preamble as the
    # program: it imports the tool from the image, calls it, and writes the
    # outcome to result_path. The value never travels on stdout, so nothing
    # the tool prints can corrupt it.
    import json, os, sys, traceback

    with open(spec_path, 'rb') as f:
        spec = json.load(f)
    os.unlink(spec_path)
    sys.argv[:] = [spec['module']]

    def finish(doc, code):
        with open(result_path, 'w', encoding='ascii') as f:
            f.write(doc)
        # os._exit: a tool's leftover non-daemon thread must not hold the
        # call open until its deadline; the runner kills any leftovers.
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os._exit(code)

    def type_name(t):
        m = getattr(t, '__module__', '')
        q = getattr(t, '__qualname__', t.__name__)
        return q if m in ('builtins', '', None) else m + '.' + q

    def failure(kind, e, tb):
        try:
            msg = str(e)
        except Exception as inner:
            msg = '<str() of the exception failed: %r>' % (inner,)
        try:
            text = ''.join(traceback.format_exception(type(e), e, tb))
        except Exception:
            text = ''
        doc = json.dumps({'error': {'kind': kind, 'type': type_name(type(e)), 'message': msg, 'traceback': text}})
        finish(doc, 1)

    try:
        import importlib
        obj = importlib.import_module(spec['module'])
        for part in spec['attr'].split('.'):
            obj = getattr(obj, part)
        # A tool decorated with sandbox_client's @sandboxed: the wrapper
        # would send the call to the sandbox again; the function is inside.
        if getattr(obj, 'sandbox_function', None) is not None and hasattr(obj, '__wrapped__'):
            obj = obj.__wrapped__
        if not callable(obj):
            raise TypeError('%s:%s is a %s, not a function' % (spec['module'], spec['attr'], type(obj).__name__))
    except BaseException as e:
        failure('import', e, e.__traceback__)

    try:
        value = obj(*spec['args'], **spec['kwargs'])
        import inspect
        if inspect.iscoroutine(value):
            import asyncio
            value = asyncio.run(value)
    except BaseException as e:
        failure('raised', e, e.__traceback__.tb_next)

    try:
        data = json.dumps(value, allow_nan=False, separators=(',', ':'))
    except (TypeError, ValueError, RecursionError) as e:
        finish(json.dumps({'error': {
            'kind': 'unserializable', 'type': 'NotJSONSerializable',
            'message': 'the return value (%s) is not JSON-serialisable: %s' % (type_name(type(value)), e),
            'traceback': ''}}), 1)
    if len(data) > max_result:
        finish(json.dumps({'error': {
            'kind': 'result_too_large', 'type': 'ResultTooLarge',
            'message': 'the return value is %d bytes of JSON, over the %d an answer can carry; '
                       'return less, or write it somewhere the agent can fetch it' % (len(data), max_result),
            'traceback': ''}}), 1)
    finish('{"result":' + data + '}', 0)
