import helper
print(helper.X, helper.__file__)
