import sys
print(sys.flags, sys.warnoptions, sys._xoptions, sys.dont_write_bytecode)
