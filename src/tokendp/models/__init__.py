"""tokendp.models"""
