"""Handlers of the tools in toolrouter.yaml.

A handler takes the call's arguments (one dict, already checked against the tool's
input_schema) and a context, and returns any JSON value. Raising an exception fails the
call with its message; raise ``router.RetryableError`` for a failure worth retrying.
"""


def greet(args, ctx):
    return {"greeting": f"Hello, {args['name']}!"}


def refund(args, ctx):
    # Pass ctx.idempotency_key to the payment system, so that it never refunds twice
    # even if toolrouter has to run this call again after a crash.
    return {"refunded": args["amount"], "order": args["order"], "reference": ctx.idempotency_key}
