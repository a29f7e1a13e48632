"""PyTorch: eager (``adapter``), with its blocks and positions, and through torch.compile (``compile``)."""
