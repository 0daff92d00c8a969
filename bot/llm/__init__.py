"""The model side: any OpenAI-compatible endpoint through the official client.

client      one AsyncOpenAI per process, built from settings; chat_completion
providers   what each kind of provider can do (tools, context size, role order)
roles       messages in the role order strict chat templates accept
tool_loop   ask, run the tools the model calls, repeat until it answers in text
leaks       tool-call syntax and reasoning leaked into reply text, stripped
tools/      the tools offered to the model: update_short_term_memory, long-term
"""
