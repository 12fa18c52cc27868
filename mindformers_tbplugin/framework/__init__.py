"""The only modules that know MindSpore and MindFormers.

``versions`` finds which releases the environment provides (without importing them) and says when
one is missing or unsupported; ``mindformers_api`` resolves every MindFormers/MindSpore name that
moved between releases; ``trainers`` turns each trainer's hook calls into plain values. The others
read what a callback must find by itself (topology and collectives, model facts, the running
config, memory, evaluation results) or plug into MindFormers (registration, the CPU train wrapper,
``mftb train``'s entry, tiny MindRecord data). MindSpore is imported inside functions, so importing
these modules stays cheap.
"""
