"""Input and output safety: detectors for secrets, personal data and policy categories,
the policy that maps each to allow/warn/redact/block, and redaction for logs.

    policy, warnings = Policy.load()
    result = scan(text, policy, destination="remote")   # a whole message
    guard = OutputGuard(policy, "local")                 # a streamed answer
    step = guard.feed(delta); ...; step = guard.finish()
    redact(text)                                         # for logs: mask everything private
"""

from .guard import GuardStep, OutputGuard
from .policy import AllowRule, Policy, PolicyError
from .scanner import Finding, ScanResult, redact, scan

__all__ = [
    "AllowRule",
    "Finding",
    "GuardStep",
    "OutputGuard",
    "Policy",
    "PolicyError",
    "ScanResult",
    "redact",
    "scan",
]
