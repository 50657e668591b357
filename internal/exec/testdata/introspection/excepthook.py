import sys
sys.excepthook = lambda t, v, tb: print('hook', t.__name__, v, tb.tb_frame.f_code.co_name, tb.tb_next)
raise ValueError('v')
