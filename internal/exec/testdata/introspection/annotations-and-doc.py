'''The doc.'''
x: int = 1
print(__annotations__, __doc__)
