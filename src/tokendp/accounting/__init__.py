"""tokendp.accounting"""
