"""Everything that differs between the MindSpore and MindFormers releases the plugin supports.

``versions`` finds which releases the environment provides (without importing them) and says when
one is missing or unsupported; ``mindformers_api`` resolves every MindFormers/MindSpore name that
moved between releases; ``trainers`` turns each trainer's hook calls into plain values. No other
module imports a version-dependent MindFormers or MindSpore path.
"""
