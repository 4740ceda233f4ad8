"""The message composer: input, send/stop and the live token count."""
