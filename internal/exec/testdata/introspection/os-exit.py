import os, sys
sys.stdout.write('kept')
os._exit(5)
