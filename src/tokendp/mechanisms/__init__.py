"""tokendp.mechanisms"""
