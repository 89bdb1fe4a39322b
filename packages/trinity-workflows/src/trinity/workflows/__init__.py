"""Trinity's built-in workflows (agent environments) and reward functions.

Everything here registers in trinity-core's ``WORKFLOWS`` / ``REWARD_FUNCTIONS`` through entry
points (see this package's ``pyproject.toml``), so ``default_workflow_type: math_workflow`` works
with this package installed and nothing imported by hand, and ``trinity.common.workflows.MathWorkflow``
(the guides' path) resolves to the class defined here. Importing ``trinity.workflows`` itself
imports no environment: each module loads when its name is first used.
"""

from trinity.workflows._agentscope_mcp import install_import_hook as _install_agentscope_hook

# agentscope 1.0.x imports an MCP SDK 1.x name that vLLM's mcp 2.x lacks (see _agentscope_mcp)
_install_agentscope_hook()
