/*-------------------------------------------------------------------------
 *
 * route_rules.h
 *	  The rules binding a sink's message routes to its settings and its
 *	  decoder, judged from the catalogs (route_rules.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_ROUTE_RULES_H
#define ASH_ROUTE_RULES_H

/* Which rules to judge. */
typedef enum AshRouteRuleScope
{
	/*
	 * What every stored configuration keeps (add_message_route and
	 * alter_sink refuse to break it): no routed prefix is ignored, a state
	 * mirror with routes has a recovery_horizon, and every route retains
	 * at least that horizon.
	 */
	ASH_ROUTE_RULES_SINK,

	/*
	 * Those, and routes only with a decoder that delivers whole logical
	 * messages: what the worker judges at every load of its configuration.
	 */
	ASH_ROUTE_RULES_WORKER,

	/*
	 * Those, and a horizon only with routes (start, preflight, doctor).
	 * Not a worker halt: a horizon left by the last route dropped, or set
	 * before the first is added, mis-applies no message.
	 */
	ASH_ROUTE_RULES_START
} AshRouteRuleScope;

/* The first rule broken, or reason NULL. */
typedef struct AshRouteVerdict
{
	const char *reason;			/* reason code, NULL: every rule holds */
	int			sqlerrcode;		/* for a refusal */
	const char *context;		/* a literal, structural: never a prefix */
} AshRouteVerdict;

/*
 * Judge the sink's stored routes and settings (SPI connected; what this
 * transaction wrote is seen).  An unknown sink breaks no rule.
 */
extern void ash_route_rules_judge(const char *sink_name, AshRouteRuleScope scope,
								  AshRouteVerdict *verdict);

#endif							/* ASH_ROUTE_RULES_H */
