package host

import (
	"errors"

	"github.com/ruled-dev/ruled/rules"
)

// RuleInfo describes one serving rule, for the admin API and status page.
type RuleInfo struct {
	Name    string `json:"name"`
	Plugin  string `json:"plugin"`
	OnError string `json:"on_error"`
	Shadow  bool   `json:"shadow"`
	Stop    bool   `json:"stop"`
	// Exempt, Replaces and DetailedMetric are the rule's exempt,
	// replaces and detailed_metric (omitted when unset).
	Exempt         bool           `json:"exempt,omitempty"`
	Replaces       []string       `json:"replaces,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	Dynamic        bool           `json:"dynamic"`
	When           string         `json:"when"`
	Subject        string         `json:"subject"`
	Config         map[string]any `json:"config"`
	File           string         `json:"file"`
	Line           int            `json:"line"`
}

// LoadError is one positioned rule-file error, as data.
type LoadError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Rule    string `json:"rule,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// LoadErrors turns a load error into data: one entry per positioned error,
// or a single entry without a position for any other error.
func LoadErrors(err error) []LoadError {
	if err == nil {
		return nil
	}
	var list rules.ErrorList
	if !errors.As(err, &list) {
		return []LoadError{{Code: "load", Message: err.Error()}}
	}
	out := make([]LoadError, len(list))
	for i, e := range list {
		out[i] = LoadError{File: e.Pos.File, Line: e.Pos.Line, Column: e.Pos.Column, Rule: e.Rule, Code: e.Code, Message: e.Message}
	}
	return out
}
