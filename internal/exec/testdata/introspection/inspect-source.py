import inspect
def f():
    return 1
print(inspect.getsource(f), inspect.getfile(f))
