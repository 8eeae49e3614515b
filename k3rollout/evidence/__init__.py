"""Write-once evidence with a sha256 manifest that ``sha256sum -c`` verifies."""

from k3rollout.evidence.store import EvidenceRef, EvidenceStore

__all__ = ["EvidenceRef", "EvidenceStore"]
