"""qkdyn: derive, simulate and test the training dynamics of attention."""
