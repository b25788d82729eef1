"""``rmqspec serve-cluster``: RocketMQ 4.x's name server and broker on the wire, backed by the reference.

``wire`` (frames and the message layout), ``server`` (the name server and the broker over the
reference's processors), ``history_log`` (the broker's history, consumer naming, merging with the
listeners' lines), ``listener`` and ``listener.js`` (the listener-side helpers), ``run`` (the command).
"""
