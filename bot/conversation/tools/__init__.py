"""The tools the model may call, implemented over the memory services."""
