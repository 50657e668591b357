import pickle
def f():
    pass
print(pickle.loads(pickle.dumps(f)) is f)
