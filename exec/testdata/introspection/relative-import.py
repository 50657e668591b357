from . import nothing
