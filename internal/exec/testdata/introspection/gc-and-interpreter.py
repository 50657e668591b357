import gc, sys
print(gc.isenabled(), gc.get_threshold(), sys.getrecursionlimit(), sys.getswitchinterval(), sys.gettrace(), sys.getprofile())
