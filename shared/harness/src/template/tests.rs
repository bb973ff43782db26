use super::*;
use serde_json::json;

fn ours(given: &[(&str, Value)]) -> Deployment<'static> {
    Template::ours()
        .expect("the template parses")
        .deploy("123456789012", "eu-west-1", given)
        .expect("admissible parameters")
}

#[test]
fn the_template_names_a_deployment_as_the_tests_derive_it() {
    let d = ours(&[("StackPrefix", json!("acme"))]);
    assert_eq!(
        d.names().unwrap(),
        ResourceNames::derive("acme", "123456789012", "eu-west-1")
    );
    let fifo = ours(&[("StackPrefix", json!("acme")), ("FifoQueues", json!("true"))]);
    let names = fifo.names().unwrap();
    assert_eq!(names.main_queue, "acme-main.fifo");
    assert_eq!(names.dead_letter_queue, "acme-dead-letter.fifo");
}

#[test]
fn the_dead_letter_queue_comes_before_the_queue_that_redrives_to_it() {
    // On the services' keys, as the local stack is (with the stores' key every queue names it).
    let d = ours(&[("CustomerManagedKeys", json!("false"))]);
    let queues = d.resources_of(&[QUEUE]).unwrap();
    let at = |id: &str| queues.iter().position(|q| q == id).unwrap();
    assert!(at("DeadLetterQueue") < at("MainQueue"), "{queues:?}");
    // The redrive policy names the DLQ's ARN: unresolvable until the DLQ exists.
    let e = d.properties(ids::MAIN_QUEUE).unwrap_err();
    assert!(e.0.contains("DeadLetterQueue.Arn"), "{e}");
}

#[test]
fn properties_resolve_parameters_conditions_and_attributes() {
    let mut d = ours(&[
        ("StackPrefix", json!("acme")),
        ("MaxReceiveCount", json!(3)),
        ("CustomerManagedKeys", json!("false")),
    ]);
    d.created(
        "ParkingQueue",
        Created {
            reference: "url".into(),
            attributes: [("Arn".to_owned(), "arn:parked".to_owned())].into(),
        },
    );
    let dlq = d.properties(ids::DEAD_LETTER_QUEUE).unwrap();
    // !If [UseFifo, true, !Ref AWS::NoValue] on a standard queue: no property at all.
    assert!(!dlq.contains_key("FifoQueue"), "{dlq:?}");
    d.created(
        ids::DEAD_LETTER_QUEUE,
        Created {
            reference: "url".into(),
            attributes: [("Arn".to_owned(), "arn:dlq".to_owned())].into(),
        },
    );
    let main = d.properties(ids::MAIN_QUEUE).unwrap();
    assert_eq!(main["QueueName"], "acme-main");
    assert_eq!(
        main["RedrivePolicy"],
        json!({"deadLetterTargetArn": "arn:dlq", "maxReceiveCount": 3})
    );
}

#[test]
fn a_resource_under_a_condition_belongs_only_to_the_deployments_it_holds_for() {
    let tables = |kind: &str| {
        ours(&[("LedgerKind", json!(kind)), ("HttpLedgerUrl", json!("https://gl"))])
            .resources_of(&[TABLE])
            .unwrap()
    };
    assert!(!tables("dynamodb").iter().any(|t| t == "DedupTable"));
    assert!(tables("http").iter().any(|t| t == "DedupTable"));
}

#[test]
fn a_parameter_value_the_template_refuses_is_refused() {
    let t = Template::ours().unwrap();
    for given in [
        ("MaxReceiveCount", json!(0)),
        ("FifoQueues", json!("maybe")),
        ("NoSuchParameter", json!("x")),
    ] {
        let e = t
            .deploy("123456789012", "eu-west-1", std::slice::from_ref(&given))
            .unwrap_err();
        assert!(e.0.contains(given.0), "{given:?}: {e}");
    }
}

#[test]
fn an_intrinsic_the_reader_does_not_know_is_an_error_naming_it() {
    let t = Template::parse(
        "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName: !Select [0, [a, b]]\n",
    )
    .unwrap();
    let e = t.deploy("1", "r", &[]).unwrap().properties("Q").unwrap_err();
    assert!(e.0.contains("Fn::Select"), "{e}");
}

#[test]
fn sub_keeps_an_escaped_literal_and_uses_its_own_variables() {
    let t = Template::parse(
        "Parameters:\n  P: {Type: String, Default: p}\nResources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n      \
         A: !Sub '${P}-${!Literal}-${AWS::Region}'\n      B: !Sub ['${X}/${P}', {X: !Ref AWS::AccountId}]\n",
    )
    .unwrap();
    let p = t.deploy("42", "r1", &[]).unwrap().properties("Q").unwrap();
    assert_eq!(p["A"], "p-${Literal}-r1");
    assert_eq!(p["B"], "42/p");
}

#[test]
fn a_cycle_of_references_is_an_error() {
    let t = Template::parse(
        "Resources:\n  A:\n    Type: AWS::SQS::Queue\n    Properties: {X: !GetAtt B.Arn}\n  B:\n    Type: AWS::SQS::Queue\n    Properties: {X: !GetAtt A.Arn}\n",
    )
    .unwrap();
    let e = t.deploy("1", "r", &[]).unwrap().resources_of(&[QUEUE]).unwrap_err();
    assert!(e.0.contains("cycle"), "{e}");
}
