import sys
print(sorted(sys.path_importer_cache), sys.meta_path, sys.path_hooks)
