e = RuntimeError('outer')
e.add_note('a note')
raise e from OSError(2, 'inner')
