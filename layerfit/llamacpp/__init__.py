"""llama.cpp's command line: the grammar layerfit reads, and the command lines it writes.

The grammar: every llama-server option of the modelled build and its effect on memory
(``flag_table``, looked up by ``flags``), the values of pass-through options (``flag_values``),
the tensor overrides (``expert_flags``, bounded by ``pattern_cost``), shell words
(``shell_words``) and which build has which flag (``builds``). It depends on ``layerfit.errors``
and ``domain.base`` only; ``domain``'s parameter and deployment types are built on it.

The writers: ``launch`` turns a layout into ``llama-server`` and ``rpc-server`` command lines, and
``expert_launch`` gives the shortest flags for the experts kept on the host. They sit above
``domain`` and ``memory``.
"""
