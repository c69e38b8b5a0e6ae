"""A message's walk through the consumer, one stage per module, in the order it takes them:
``receiving`` → ``claiming`` → ``submitting`` (its ``gates`` and ``payload``; it records
through ``recording``) → ``settling``. Each stage answers in ``outcome``'s vocabulary."""
