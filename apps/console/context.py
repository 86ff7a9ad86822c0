from apps.tenants.permissions import Action, Role, role_can
from apps.tenants.selectors import tenant_list_for_user

NAVIGATION = [
    ("Overview", "console:home", Action.TENANT_VIEW),
    ("Trajectories", "console:trajectories", Action.TRAJECTORY_VIEW),
    ("Training queue", "console:training-queue", Action.TRAJECTORY_VIEW),
    ("Training jobs", "console:training-jobs", Action.TRAINING_VIEW),
    ("Models", "console:model-versions", Action.MODEL_VERSION_VIEW),
    ("Annotation", "console:annotation-queues", Action.ANNOTATION_VIEW),
    ("Evaluation", "console:eval-suites", Action.EVAL_VIEW),
    ("Evaluators", "console:evaluators", Action.REWARD_VIEW),
    ("Reward specs", "console:reward-specs", Action.REWARD_VIEW),
    ("Releases", "console:releases", Action.RELEASE_VIEW),
    ("Serving", "console:serving", Action.SERVING_VIEW),
    ("Evolution", "console:evolution", Action.EVOLUTION_VIEW),
    ("Members", "console:members", Action.MEMBER_VIEW),
    ("API keys", "console:keys", Action.API_KEY_VIEW),
    ("Policy", "console:policy", Action.POLICY_VIEW),
    ("Backends", "console:backends", Action.BACKEND_VIEW),
    ("Audit log", "console:audit", Action.AUDIT_VIEW),
]


# An annotator's navigation holds only what they use: their queues (the overview stays behind the brand).
ANNOTATOR_NAVIGATION = {"console:annotation-queues"}


def console(request):
    """Navigation filtered by the current role, and the tenants the user can switch to."""
    membership = getattr(request, "membership", None)
    if membership is None:
        return {}
    return {
        "current_tenant": request.tenant,
        "current_role": membership.role,
        "navigation": [
            (label, url)
            for label, url, action in NAVIGATION
            if role_can(membership.role, action)
            and (membership.role != Role.ANNOTATOR or url in ANNOTATOR_NAVIGATION)
        ],
        "switchable_tenants": list(tenant_list_for_user(user=request.user)),
    }
