"""The Powertools side of `make bench-e2e`: the same bodies through bench/powertools_consumer.py,
pumped the way our harness pumps the Rust consumer (Lambda's SQS poller stand-in: receive up to 10,
build the SQS event, call the handler, delete what it did not report as failed).

It creates its own queue (with a DLQ, redrive after --max-receive receives) and tables on the local
stack, removes them at the end, and prints one JSON line of figures:
- DynamoDB requests (every attempt) and write units (what DynamoDB reports for each write, plus one
  per conditional write refused, which AWS charges and DynamoDB Local does not report), counted by
  boto3 event hooks, as our harness counts them with an SDK interceptor;
- the handler's own time per batch, the time in queue calls, and two wall times: until every
  message was handled once (first pass) and until the queue was empty (drain: poison returns
  after the visibility timeout until the redrive moves it).

    python bench/e2e_powertools.py --bodies FILE --sqs URL --dynamodb URL [--visibility 2] [--max-receive 3]
"""

import argparse
import json
import os
import sys
import time
import uuid


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--bodies", required=True, help="one message body per line")
    p.add_argument("--sqs", required=True, help="the SQS endpoint (LocalStack)")
    p.add_argument("--dynamodb", required=True, help="the DynamoDB endpoint (DynamoDB Local)")
    p.add_argument("--visibility", type=int, default=2)
    p.add_argument("--max-receive", type=int, default=3)
    p.add_argument("--timeout", type=int, default=600, help="give up after this many seconds")
    return p.parse_args()


class Context:
    """The parts of Lambda's context the Powertools utilities read."""

    function_name = "powertools-consumer"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:powertools-consumer"

    def __init__(self, timeout_ms: int):
        self.aws_request_id = str(uuid.uuid4())
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class Meter:
    """Requests per service and DynamoDB write units, from boto3's event hooks."""

    WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")

    def __init__(self):
        self.requests = {}
        self.write_units = 0.0
        self.refused = 0

    def attach(self, client):
        service = client.meta.service_model.service_name
        events = client.meta.events
        events.register(f"before-send.{service}", lambda **kw: self._count(service))
        if service == "dynamodb":
            for op in self.WRITES:
                events.register(f"provide-client-params.dynamodb.{op}", self._ask_capacity)
                events.register(f"after-call.dynamodb.{op}", self._capacity)
                events.register(f"after-call-error.dynamodb.{op}", self._capacity)

    def _count(self, service):
        self.requests[service] = self.requests.get(service, 0) + 1

    @staticmethod
    def _ask_capacity(params, **kw):
        params["ReturnConsumedCapacity"] = "TOTAL"

    def _capacity(self, parsed=None, **kw):
        parsed = parsed or {}
        code = parsed.get("Error", {}).get("Code", "")
        if code in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            self.refused += 1
            self.write_units += 1.0
            return
        consumed = parsed.get("ConsumedCapacity")
        for c in consumed if isinstance(consumed, list) else [consumed] if consumed else []:
            self.write_units += float(c.get("CapacityUnits", 0))


def event_record(m, queue_arn):
    return {
        "messageId": m["MessageId"],
        "receiptHandle": m["ReceiptHandle"],
        "body": m["Body"],
        "attributes": m.get("Attributes", {}),
        "messageAttributes": m.get("MessageAttributes", {}),
        "md5OfBody": m["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1",
    }


def main():
    args = parse_args()
    for k, v in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(k, v)
    prefix = f"bench-pt-{uuid.uuid4().hex[:8]}"
    os.environ["LEDGER_TABLE"] = f"{prefix}-ledger"
    os.environ["IDEMPOTENCY_TABLE"] = f"{prefix}-idempotency"
    os.environ["DYNAMODB_ENDPOINT"] = args.dynamodb
    os.environ["POWERTOOLS_SERVICE_NAME"] = "powertools-consumer"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

    import boto3

    sqs = boto3.client("sqs", endpoint_url=args.sqs)
    ddb = boto3.client("dynamodb", endpoint_url=args.dynamodb)
    with open(args.bodies) as f:
        bodies = [line.rstrip("\n") for line in f if line.strip()]

    for table, key in ((os.environ["LEDGER_TABLE"], "source_hash"), (os.environ["IDEMPOTENCY_TABLE"], "id")):
        ddb.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    dlq_url = sqs.create_queue(QueueName=f"{prefix}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(args.max_receive)})
    queue_url = sqs.create_queue(
        QueueName=f"{prefix}-main",
        Attributes={"RedrivePolicy": redrive, "VisibilityTimeout": str(args.visibility)},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    try:
        for i in range(0, len(bodies), 10):
            entries = [{"Id": str(j), "MessageBody": b} for j, b in enumerate(bodies[i : i + 10])]
            out = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
            if out.get("Failed"):
                raise SystemExit(f"send failed: {out['Failed']}")
        print(json.dumps(pump(args, sqs, queue_url, queue_arn, dlq_url, len(bodies))))
    finally:
        sqs.delete_queue(QueueUrl=queue_url)
        sqs.delete_queue(QueueUrl=dlq_url)
        for table in (os.environ["LEDGER_TABLE"], os.environ["IDEMPOTENCY_TABLE"]):
            ddb.delete_table(TableName=table)


def depth(sqs, url):
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(a.get(n, 0)) for n in names)


def pump(args, sqs, queue_url, queue_arn, dlq_url, count):
    import powertools_consumer as consumer

    meter = Meter()
    meter.attach(consumer.dynamodb)
    s = dict(batches=0, received=0, deleted=0, failed=0, handler_s=0.0, full_batches=0, full_batch_s=0.0, queue_s=0.0)
    seen = set()
    first_pass = None
    started = time.monotonic()
    busy = 0.0
    idle = 0
    while True:
        if time.monotonic() - started > args.timeout:
            raise SystemExit(f"queue not drained after {args.timeout} s")
        t = time.monotonic()
        msgs = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=args.visibility,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        received = time.monotonic() - t
        if not msgs:
            idle = idle + 1 if depth(sqs, queue_url) == 0 else 0
            if idle >= 2:
                break
            continue
        idle = 0
        event = {"Records": [event_record(m, queue_arn) for m in msgs]}
        t = time.monotonic()
        try:
            response = consumer.lambda_handler(event, Context(60_000))
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        except Exception:  # the invocation fails (Powertools raises when every record failed): Lambda deletes nothing
            failed = {m["MessageId"] for m in msgs}
        handled = time.monotonic() - t
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(msgs)
            if m["MessageId"] not in failed
        ]
        t = time.monotonic()
        if entries:
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        s["queue_s"] += received + time.monotonic() - t
        s["batches"] += 1
        s["received"] += len(msgs)
        s["deleted"] += len(entries)
        s["failed"] += len(failed)
        s["handler_s"] += handled
        # Full batches of first deliveries only: a redelivered poison batch costs next to nothing.
        if len(msgs) == 10 and not any(m["MessageId"] in seen for m in msgs):
            s["full_batches"] += 1
            s["full_batch_s"] += handled
        seen.update(m["MessageId"] for m in msgs)
        busy = time.monotonic() - started
        if first_pass is None and len(seen) >= count:
            first_pass = busy
    s.update(
        first_pass_s=first_pass,
        busy_s=busy,
        dynamodb_requests=meter.requests.get("dynamodb", 0),
        write_units=meter.write_units,
        refused_writes=meter.refused,
    )
    pages = consumer.dynamodb.get_paginator("scan").paginate(TableName=os.environ["LEDGER_TABLE"], Select="COUNT")
    s["committed"] = sum(page["Count"] for page in pages)
    s["dead_lettered"] = depth(sqs, dlq_url)
    return s


if __name__ == "__main__":
    main()
