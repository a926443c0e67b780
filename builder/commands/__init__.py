"""The command-line verbs: each module is a thin layer that turns options into one stage call.

Shared options live in `options`; a command module never imports another command module.
Imports: any stage.
"""
