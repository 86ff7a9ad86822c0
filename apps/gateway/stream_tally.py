"""What a chat-completion stream says about its tokens, for the wires that translate it (pure, no I/O).

`anthropic_stream.ChatStreamToMessageEvents` and `responses_stream.ChatStreamToResponseEvents` both report
usage at the end of a stream they translate: the backend's `usage` chunk when it sent one, else the token
ids counted as they came (`prompt_token_ids` on a chunk; the first choice's `token_ids`). One tally, so the
two wires count the same way.
"""


class StreamTally:
    __slots__ = ("usage", "prompt_ids", "completion_ids")

    def __init__(self):
        self.usage: dict | None = None  # the last `usage` object a chunk carried
        self.prompt_ids = 0  # len(prompt_token_ids) of the chunk that carried them
        self.completion_ids = 0  # the first choice's token ids, summed over chunks

    def first_choices(self, chunk: dict) -> list[dict]:
        """Counts the chunk's usage and token ids, and returns the entries of its first choice (index 0, the
        only one the wires translate), usually one."""
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_ids = len(chunk["prompt_token_ids"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        first = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("token_ids"), list):
                self.completion_ids += len(choice["token_ids"])
            first.append(choice)
        return first
