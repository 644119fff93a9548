"""tokendp.backends"""
