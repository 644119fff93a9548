"""tokendp.eval"""
