"""torch.version of the test double: a CUDA build."""
cuda = "12.8"
hip = None
