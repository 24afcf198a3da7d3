"""Engine integrations: CoDec as the attention of serving engines, apart from the library core.

- ``codec.integrations.transformers``: Hugging Face transformers' continuous batching (``paged|codec``).
"""
