"""Fixtures of the policy tests: the scripted OpenAI-shaped server and the real vLLM server."""

from tests.llm.servers import scripted_openai, vllm_server  # noqa: F401  (fixtures)
