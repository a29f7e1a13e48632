"""torchtitan's own model code: complex RoPE (plain and Llama 3-scaled), RMSNorm, LayerNorm, the SwiGLU FeedForward and
its hidden-width rule, FlexAttention with the decoder's masks (causal, sliding window, fixed blocks), DeepSeek-V3's
MLA, the Llama 3 block, the TokenChoiceTopKRouter and the training losses."""
