import sys
m = sys.modules['__main__']
print(m.__dict__ is globals(), m.__spec__, type(m.__loader__).__name__, m.__loader__.name, m.__loader__.path)
print(__name__, __package__, __doc__, __builtins__ is sys.modules['builtins'])
