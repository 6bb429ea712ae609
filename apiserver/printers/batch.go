package printers

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Printers of the batch/v1 kinds.

func batchPrinters() []printerEntry {
	return []printerEntry{
		{&batchv1.Job{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Status", "Where the job stands: Running, Complete, Failed, Suspended..."),
			stringColumn("Completions", "Pods succeeded of the completions wanted."),
			stringColumn("Duration", "How long the job ran (or has been running)."),
			ageColumn, containersColumn, imagesColumn, selectorColumn,
		}, jobCells)},
		{&batchv1.CronJob{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Schedule", "When jobs are started, in cron format."),
			stringColumn("Timezone", "Time zone the schedule is read in."),
			stringColumn("Suspend", "Whether starting new jobs is suspended."),
			integerColumn("Active", "Jobs of the cron job now running."),
			stringColumn("Last Schedule", "Time since a job was last scheduled."),
			ageColumn,
			wide(stringColumn("Containers", "Names of the containers in the job template.")),
			wide(stringColumn("Images", "Images of the containers in the job template.")),
			wide(stringColumn("Selector", "Label selector of the job template.")),
		}, cronJobCells)},
	}
}

func jobCells(j *batchv1.Job) []any {
	// Without completions, one success completes the job (a work queue).
	parallelism := int32Or(j.Spec.Parallelism, 1)
	var completions string
	switch {
	case j.Spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
	case parallelism > 1:
		completions = fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, parallelism)
	default:
		completions = fmt.Sprintf("%d/1", j.Status.Succeeded)
	}
	var took string
	switch start, end := j.Status.StartTime, j.Status.CompletionTime; {
	case start == nil:
	case end == nil:
		took = duration.HumanDuration(time.Since(start.Time))
	default:
		took = duration.HumanDuration(end.Sub(start.Time))
	}
	names, images := containerCells(j.Spec.Template.Spec.Containers)
	return []any{
		j.Name, jobStatus(j), completions, took, translateAge(j.CreationTimestamp),
		names, images, labelSelectorCell(j.Spec.Selector),
	}
}

// jobStatus is the job's state: a terminal condition first, then
// termination, suspension and the conditions that precede the terminal
// ones.
func jobStatus(j *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == t {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	switch {
	case has(batchv1.JobComplete):
		return "Complete"
	case has(batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case has(batchv1.JobSuspended):
		return "Suspended"
	case has(batchv1.JobFailureTarget):
		return "FailureTarget"
	case has(batchv1.JobSuccessCriteriaMet):
		return "SuccessCriteriaMet"
	}
	return "Running"
}

func cronJobCells(c *batchv1.CronJob) []any {
	last := cellNone
	if c.Status.LastScheduleTime != nil {
		last = translateAge(*c.Status.LastScheduleTime)
	}
	tz := cellNone
	if c.Spec.TimeZone != nil {
		tz = *c.Spec.TimeZone
	}
	suspend := "False" // unset is not suspended
	if c.Spec.Suspend != nil && *c.Spec.Suspend {
		suspend = "True"
	}
	tmpl := c.Spec.JobTemplate.Spec
	names, images := containerCells(tmpl.Template.Spec.Containers)
	return []any{
		c.Name, c.Spec.Schedule, tz, suspend, int64(len(c.Status.Active)), last, translateAge(c.CreationTimestamp),
		names, images, labelSelectorCell(tmpl.Selector),
	}
}
