print({k: repr(v) for k, v in globals().items()})
