import sys
print(sys.argv, sys.orig_argv, sys.path, sys.executable, sys.prefix, sys.base_prefix)
