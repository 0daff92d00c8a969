"""The model side: any OpenAI-compatible endpoint through the official client.

Imports nothing from memory: the tools it runs are handed to it.

client      one AsyncOpenAI per process, built from settings; chat_completion
roles       messages in the role order strict chat templates accept
tool_loop   ask, run the tools the model calls, repeat until it answers in text
model_call  one request of a turn, within its deadline, with the history-tools fallbacks
streaming   one streamed request: the raw event lines read over the client's HTTP
stream_assembly  a streamed answer put back together (text, tool-call deltas) from its lines
failures    the notices shown instead of an answer; what each error or refusal means
tool_calls  the calls in an answer: read, echoed in the history, run
reply_text  the final answer after what was written beside the tool calls
leaks       tool-call syntax and reasoning leaked into reply text, stripped
tools/      what a tool is to the loop: its schema, result, argument parsing
"""
