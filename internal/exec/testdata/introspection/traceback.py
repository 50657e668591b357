def inner(x):
    return 1 / x

def outer():
    return inner(0)

outer()
