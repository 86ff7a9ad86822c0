"""Eval suites, cases, runs and case results written straight to their tables. A run that should be
enqueued goes through `eval_run_start`; these are for the rows a worker would have left."""

import factory

from apps.evaluation.models import EvalCase, EvalCaseResult, EvalRun, EvalSuite, Scorer
from tests.tenants.factories import TenantFactory
from tests.training.factories import ModelVersionFactory


class EvalSuiteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EvalSuite

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda number: f"suite-{number}")


class EvalCaseFactory(factory.django.DjangoModelFactory):
    """An exact-match case: the model must say the case's key."""

    class Meta:
        model = EvalCase

    suite = factory.SubFactory(EvalSuiteFactory)
    tenant = factory.SelfAttribute("suite.tenant")
    key = factory.Sequence(lambda number: f"case-{number}")
    input_messages = factory.LazyAttribute(lambda case: [{"role": "user", "content": f"say {case.key}"}])
    scorer = Scorer.EXACT_MATCH
    scorer_config = factory.LazyAttribute(lambda case: {"expected": case.key})


class EvalRunFactory(factory.django.DjangoModelFactory):
    """A queued run of a suite against a version of the suite's tenant."""

    class Meta:
        model = EvalRun

    suite = factory.SubFactory(EvalSuiteFactory)
    tenant = factory.SelfAttribute("suite.tenant")
    model_version = factory.SubFactory(ModelVersionFactory, tenant=factory.SelfAttribute("..tenant"))


class EvalCaseResultFactory(factory.django.DjangoModelFactory):
    """One case's outcome in a run (passed unless told otherwise), as the eval worker stores it."""

    class Meta:
        model = EvalCaseResult

    run = factory.SubFactory(EvalRunFactory)
    tenant = factory.SelfAttribute("run.tenant")
    case = factory.SubFactory(
        EvalCaseFactory, suite=factory.SelfAttribute("..run.suite"), tenant=factory.SelfAttribute("..tenant")
    )
    passed = True
    score = factory.LazyAttribute(lambda result: float(result.passed))
