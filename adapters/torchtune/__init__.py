"""torchtune's modules: RoPE (plain and Llama 3.1-scaled), RMSNorm, the Llama feed-forward, attention, chunked
cross-entropy."""
