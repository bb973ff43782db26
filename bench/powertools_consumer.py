"""The peer of `make bench-e2e`: the consumer a team would write with AWS Lambda Powertools for Python.

What the Powertools documentation recommends for an SQS-triggered ledger writer:
- BatchProcessor with partial batch response (a failed record goes back to the queue, and to the
  DLQ through the redrive policy after maxReceiveCount receives);
- the idempotency utility on DynamoDB, keyed by the transaction's source_hash, around the posting;
- a pydantic model for the body, with the same checks as our consumer's (canonical hash, currency
  minor units, closed period), taken from bench/python_baseline.py.

The posting is a plain PutItem into a ledger table: the idempotency record guards it.

Environment: LEDGER_TABLE, IDEMPOTENCY_TABLE, and DYNAMODB_ENDPOINT for a local DynamoDB.
"""

import os
from decimal import Decimal

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from python_baseline import CLOSED, MINOR_UNITS, ReconMessage, canonical_hash

dynamodb = boto3.client("dynamodb", endpoint_url=os.environ.get("DYNAMODB_ENDPOINT"))
LEDGER_TABLE = os.environ["LEDGER_TABLE"]

processor = BatchProcessor(event_type=EventType.SQS)
persistence = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE"], boto3_client=dynamodb)
config = IdempotencyConfig(event_key_jmespath="source_hash", raise_on_no_idempotency_key=True)


class Poison(Exception):
    """A message that can never be posted as it is."""


@idempotent_function(data_keyword_argument="transaction", config=config, persistence_store=persistence)
def post(transaction: dict) -> dict:
    dynamodb.put_item(
        TableName=LEDGER_TABLE,
        Item={
            "source_hash": {"S": transaction["source_hash"]},
            "ledger_entity": {"S": transaction["ledger_entity"]},
            "currency": {"S": transaction["currency"]},
            "amount": {"N": transaction["amount"]},
            "value_date": {"S": transaction["value_date"]},
            "external_ref": {"S": transaction["external_ref"]},
            "message_id": {"S": transaction["message_id"]},
            "sqs_message_id": {"S": transaction["sqs_message_id"]},
        },
        # Not needed with the idempotency record in front; here so that a double posting would
        # fail loudly instead of overwriting (the benchmark counts the ledger's rows).
        ConditionExpression="attribute_not_exists(source_hash)",
    )
    return {"status": "COMMITTED", "source_hash": transaction["source_hash"]}


def record_handler(record: SQSRecord) -> dict:
    m = ReconMessage.model_validate_json(record.body)
    if canonical_hash(m) != m.source_hash.lower():
        raise Poison("source_hash does not match the content")
    units = MINOR_UNITS.get(m.currency.upper())
    if units is None:
        raise Poison(f"unmapped currency {m.currency}")
    if -m.amount.normalize().as_tuple().exponent > units:
        raise Poison("more decimals than the currency has")
    if (m.ledger_entity, m.value_date[:7]) in CLOSED:
        raise Poison("closed period")
    amount: Decimal = m.amount
    return post(
        transaction={
            "source_hash": m.source_hash.lower(),
            "ledger_entity": m.ledger_entity,
            "currency": m.currency.upper(),
            "amount": str(amount),
            "value_date": m.value_date,
            "external_ref": m.external_ref,
            "message_id": m.message_id,
            "sqs_message_id": record.message_id,
        }
    )


def lambda_handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
