import locale, sys
print(locale.getlocale(), locale.getpreferredencoding(), sys.getfilesystemencoding())
