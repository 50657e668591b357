import atexit, sys
atexit.register(lambda: print('atexit', sorted(k for k in globals() if k.startswith('__')), getattr(sys, 'last_type', None), getattr(sys, 'last_value', None)))
raise ValueError('boom')
