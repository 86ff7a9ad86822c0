from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response

from apps.tenants import selectors, services
from apps.tenants.api import INTEGER_COLUMN_MAX, TenantApi, UserApi
from apps.tenants.authentication import KeyPrincipal
from apps.tenants.models import MAX_SESSION_IDLE_SECONDS, ConsentMode, PiiMode
from apps.tenants.permissions import Action, Role, Scope


class TenantListApi(UserApi):
    """The tenants the caller can act in: a key's own tenant, or a person's memberships with roles. Scoped to
    the caller, not to one tenant (`UserApi`)."""

    @extend_schema_serializer(component_name="TenantMembership")
    class OutputSerializer(serializers.Serializer):
        slug = serializers.CharField()
        name = serializers.CharField()
        role = serializers.CharField(allow_null=True)

    @extend_schema(responses=OutputSerializer(many=True))
    def get(self, request):
        if isinstance(request.user, KeyPrincipal):
            tenant = selectors.tenant_get_by_slug(slug=request.user.tenant_slug)
            rows = [{"slug": tenant.slug, "name": tenant.name, "role": None}]
        else:
            rows = selectors.tenant_list_for_user(user=request.user)
        return self.paginated(rows, self.OutputSerializer)


class PolicyDetailApi(TenantApi):
    actions = {"GET": Action.POLICY_VIEW, "PATCH": Action.POLICY_EDIT}

    @extend_schema_serializer(component_name="PolicyPrice")
    class PriceSerializer(serializers.Serializer):
        prompt_per_1k = serializers.FloatField(min_value=0)
        completion_per_1k = serializers.FloatField(min_value=0)

    @extend_schema_serializer(component_name="PolicyUpdate")
    class InputSerializer(serializers.Serializer):
        allowed_models = serializers.ListField(child=serializers.CharField(max_length=200), required=False)
        rate_limit_rpm = serializers.IntegerField(
            min_value=1, max_value=INTEGER_COLUMN_MAX, allow_null=True, required=False
        )
        rate_limit_tpm = serializers.IntegerField(
            min_value=1, max_value=INTEGER_COLUMN_MAX, allow_null=True, required=False
        )
        monthly_budget_usd = serializers.DecimalField(
            max_digits=12, decimal_places=4, min_value=0, allow_null=True, required=False
        )
        consent_mode = serializers.ChoiceField(choices=ConsentMode.choices, required=False)
        retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
        pii_mode = serializers.ChoiceField(choices=PiiMode.choices, required=False)
        price_table = serializers.DictField(child=serializers.DictField(), required=False)
        pii_patterns = serializers.ListField(child=serializers.DictField(), required=False)
        late_reward_hours = serializers.IntegerField(min_value=0, max_value=24 * 366, required=False)
        session_idle_seconds = serializers.IntegerField(
            min_value=0, max_value=MAX_SESSION_IDLE_SECONDS, required=False
        )
        review_required = serializers.BooleanField(required=False)
        two_person_promotion = serializers.BooleanField(required=False)

        def validate_price_table(self, table):
            for model, prices in table.items():
                entry = PolicyDetailApi.PriceSerializer(data=prices)
                if not entry.is_valid():
                    raise serializers.ValidationError({model: entry.errors})
                table[model] = dict(entry.validated_data)
            return table

    @extend_schema_serializer(component_name="Policy")
    class OutputSerializer(serializers.Serializer):
        tenant = serializers.CharField(source="tenant.slug")
        allowed_models = serializers.ListField()
        rate_limit_rpm = serializers.IntegerField(allow_null=True)
        rate_limit_tpm = serializers.IntegerField(allow_null=True)
        monthly_budget_usd = serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True)
        consent_mode = serializers.CharField()
        retention_days = serializers.IntegerField()
        pii_mode = serializers.CharField()
        price_table = serializers.DictField()
        pii_patterns = serializers.ListField()
        late_reward_hours = serializers.IntegerField()
        session_idle_seconds = serializers.IntegerField()
        review_required = serializers.BooleanField()
        two_person_promotion = serializers.BooleanField()
        updated_at = serializers.DateTimeField()

    @extend_schema(responses=OutputSerializer)
    def get(self, request):
        return Response(self.OutputSerializer(self.tenant.policy).data)

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def patch(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = services.policy_update(
            tenant=self.tenant, actor=self.actor, changes=dict(body.validated_data)
        )
        return Response(self.OutputSerializer(policy).data)


class MemberOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField(source="user.username")
    email = serializers.CharField(source="user.email")
    role = serializers.CharField()
    created_at = serializers.DateTimeField()


class MemberListApi(TenantApi):
    actions = {"GET": Action.MEMBER_VIEW, "POST": Action.MEMBER_MANAGE}

    @extend_schema_serializer(component_name="MemberAdd")
    class InputSerializer(serializers.Serializer):
        user = serializers.CharField(max_length=254, help_text="username or email of an existing user")
        role = serializers.ChoiceField(choices=Role.choices)

    @extend_schema(responses=MemberOutputSerializer(many=True))
    def get(self, request):
        return self.paginated(selectors.membership_list(tenant=self.tenant), MemberOutputSerializer)

    @extend_schema(request=InputSerializer, responses={201: MemberOutputSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = services.membership_add(
            tenant=self.tenant,
            actor=self.actor,
            user_identifier=body.validated_data["user"],
            role=body.validated_data["role"],
        )
        return Response(MemberOutputSerializer(membership).data, status=201)


class MemberDetailApi(TenantApi):
    actions = {"GET": Action.MEMBER_VIEW, "PATCH": Action.MEMBER_MANAGE, "DELETE": Action.MEMBER_MANAGE}

    @extend_schema_serializer(component_name="MemberRoleChange")
    class InputSerializer(serializers.Serializer):
        role = serializers.ChoiceField(choices=Role.choices)

    @extend_schema(responses=MemberOutputSerializer)
    def get(self, request, membership_id):
        membership = selectors.membership_get(tenant=self.tenant, membership_id=membership_id)
        return Response(MemberOutputSerializer(membership).data)

    @extend_schema(request=InputSerializer, responses=MemberOutputSerializer)
    def patch(self, request, membership_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = services.membership_change_role(
            tenant=self.tenant,
            actor=self.actor,
            membership_id=membership_id,
            role=body.validated_data["role"],
        )
        return Response(MemberOutputSerializer(membership).data)

    @extend_schema(responses={204: None})
    def delete(self, request, membership_id):
        services.membership_remove(tenant=self.tenant, actor=self.actor, membership_id=membership_id)
        return Response(status=204)


class ApiKeyOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.ListField()
    status = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    grace_until = serializers.DateTimeField(allow_null=True)
    replaced_by = serializers.IntegerField(source="replaced_by_id", allow_null=True)

    def get_status(self, key) -> str:
        return key.status_at(self.context["now"])


class ApiKeyCreatedSerializer(ApiKeyOutputSerializer):
    key = serializers.CharField(help_text="the secret; shown only in this response")


def _key_payload(key, raw=None) -> dict:
    serializer_class = ApiKeyCreatedSerializer if raw else ApiKeyOutputSerializer
    if raw:
        key.key = raw
    return serializer_class(key, context={"now": timezone.now()}).data


class ApiKeyListApi(TenantApi):
    actions = {"GET": Action.API_KEY_VIEW, "POST": Action.API_KEY_MANAGE}

    @extend_schema_serializer(component_name="ApiKeyCreate")
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=120)
        scopes = serializers.ListField(
            child=serializers.ChoiceField(choices=[scope.value for scope in Scope]), allow_empty=False
        )
        expires_in_days = serializers.IntegerField(
            min_value=1, max_value=3650, required=False, allow_null=True
        )

    @extend_schema(responses=ApiKeyOutputSerializer(many=True))
    def get(self, request):
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.api_key_list(tenant=self.tenant), request, view=self)
        data = ApiKeyOutputSerializer(page, many=True, context={"now": timezone.now()}).data
        return paginator.get_paginated_response(data)

    @extend_schema(request=InputSerializer, responses={201: ApiKeyCreatedSerializer})
    def post(self, request):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, raw = services.api_key_create(
            tenant=self.tenant,
            actor=self.actor,
            created_by=None if self.membership is None else request.user,
            **body.validated_data,
        )
        return Response(_key_payload(key, raw), status=201)


class ApiKeyDetailApi(TenantApi):
    actions = {"GET": Action.API_KEY_VIEW}

    @extend_schema(responses=ApiKeyOutputSerializer)
    def get(self, request, key_id):
        return Response(_key_payload(selectors.api_key_get(tenant=self.tenant, key_id=key_id)))


class ApiKeyRevokeApi(TenantApi):
    actions = {"POST": Action.API_KEY_MANAGE}

    @extend_schema(request=None, responses=ApiKeyOutputSerializer)
    def post(self, request, key_id):
        key = services.api_key_revoke(tenant=self.tenant, actor=self.actor, key_id=key_id)
        return Response(_key_payload(key))


class ApiKeyRotateApi(TenantApi):
    actions = {"POST": Action.API_KEY_MANAGE}

    @extend_schema_serializer(component_name="ApiKeyRotate")
    class InputSerializer(serializers.Serializer):
        grace_seconds = serializers.IntegerField(min_value=0, max_value=30 * 86400, default=3600)

    @extend_schema(request=InputSerializer, responses={201: ApiKeyCreatedSerializer})
    def post(self, request, key_id):
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        new, raw = services.api_key_rotate(
            tenant=self.tenant,
            actor=self.actor,
            key_id=key_id,
            grace_seconds=body.validated_data["grace_seconds"],
            created_by=None if self.membership is None else request.user,
        )
        return Response(_key_payload(new, raw), status=201)
