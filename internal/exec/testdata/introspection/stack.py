import traceback, sys
traceback.print_stack()
print(len(__import__('inspect').stack()))
