"""Notebook integration: the %%torchx magics, job handles, live widgets and DataFrames."""
