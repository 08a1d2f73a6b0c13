"""``loopscale`` subcommands of this pipeline area (being written)."""


def register(sub):
    pass
