"""What the A2A x402 extension's two sides share in the tests (x402_a2a_client.py, the paying
client, and x402_a2a_agent.py, the merchant): the extension's URI (v0.2,
https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2/spec.md) and a message's
metadata as plain JSON."""

from google.protobuf.json_format import MessageToDict

EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"


def integral(value):
    """Protobuf's Struct keeps numbers as doubles: 2.0 back to 2."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def metadata_of(msg):
    """The metadata of an a2a-sdk message (None: none), its numbers as the sender wrote them."""
    if msg is None or not msg.HasField("metadata"):
        return {}
    return integral(MessageToDict(msg.metadata))
