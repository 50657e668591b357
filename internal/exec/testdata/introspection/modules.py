import sys
print(sorted(sys.modules))
