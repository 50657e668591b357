import __main__
print(__main__.__file__, __main__.__name__)
