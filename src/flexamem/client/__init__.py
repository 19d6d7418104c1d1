"""A memory at a URL: ``fm.Memory("https://host:8000", key=...)`` gives the library's API over
``flexamem serve`` (sync and async, typed errors, retries that store nothing twice)."""

from flexamem.client.remote import RemoteAgentSession, RemoteMemory
from flexamem.config import ClientSettings
from flexamem.memory import Memory

Memory.remote = RemoteMemory

__all__ = ["ClientSettings", "RemoteAgentSession", "RemoteMemory"]
