"""The sample agent's tools, which the e2e suite calls through POST /v1/call
in one-use pods of the agent image (e2e/hack/agent-image.sh)."""
